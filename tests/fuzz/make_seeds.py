#!/usr/bin/python3
"""Builds the fuzzers' seed corpora from the repository's own inputs.

    tests/fuzz/make_seeds.py OUTDIR

writes OUTDIR/<harness>/<name> for each harness: scenario (scenarios/*.yaml and every case of
scenarios/validation/*.yaml, one scenario per file), model_catalog (models/catalog/*.yaml and
the validation cases' inline models), gpu_catalog, link_catalog (hardware/catalog/*),
hf_config (tests/models/data/*.json), result (tests/golden/*.json: the result contract),
overlay (scenarios/validation/*.yaml that are overlays, and each of their rules alone), profile
(hardware/profiles/*.yaml, cut down to a few rows per table so that each seed stays small) and
unit_parse (every quantity written in those files,
behind a first byte that picks its dimension). Generated, never committed: rerun it when the
inputs change (tests/fuzz/fuzz.sh does).
"""
import pathlib
import re
import shutil
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Dimension indices of base/unit_parse.h: kTime, kBytes, kFlop, kByteRate, kFlopRate,
# kFrequency, kPower.
DIMENSIONS = 7
QUANTITY = re.compile(r"^[+-]?[0-9][0-9.eE+-]*\s*[A-Za-zµ/]+$")


def write(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def quantities(node, found):
    """Collects scalar strings that look like quantities with units."""
    if isinstance(node, dict):
        for value in node.values():
            quantities(value, found)
    elif isinstance(node, list):
        for value in node:
            quantities(value, found)
    elif isinstance(node, str) and QUANTITY.match(node.strip()):
        found.add(node.strip())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    found = set()

    for path in sorted(ROOT.glob("scenarios/*.yaml")):
        write(out / "scenario", path.name, path.read_text(encoding="utf-8"))
        quantities(yaml.safe_load(path.read_text(encoding="utf-8")), found)
    for path in sorted(ROOT.glob("scenarios/validation/*.yaml")):
        cases = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        if cases and all("set" in rule for rule in cases):
            write(out / "overlay", path.name, path.read_text(encoding="utf-8"))
            for index, rule in enumerate(cases):
                text = yaml.safe_dump([rule], sort_keys=False, allow_unicode=True)
                write(out / "overlay", f"{path.stem}-{index}.yaml", text)
            continue
        for case in cases:
            scenario = case.get("scenario")
            if not isinstance(scenario, dict):
                continue
            text = yaml.safe_dump(scenario, sort_keys=False, allow_unicode=True)
            write(out / "scenario", f"{path.stem}-{case['id']}.yaml", text)
            quantities(scenario, found)
            if isinstance(scenario.get("model"), dict):
                model = yaml.safe_dump(scenario["model"], sort_keys=False, allow_unicode=True)
                write(out / "model_catalog", f"{path.stem}-{case['id']}.yaml", model)

    for harness, pattern in (("model_catalog", "models/catalog/*.yaml"),
                             ("gpu_catalog", "hardware/catalog/gpus/*.yaml"),
                             ("link_catalog", "hardware/catalog/links/*.yaml"),
                             ("hf_config", "tests/models/data/*.json"),
                             ("result", "tests/golden/*.json")):
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            write(out / harness, path.name, text)
            if path.suffix == ".yaml":
                quantities(yaml.safe_load(text), found)

    # Profiles: every table keeps a few rows (several subsets), so the seeds stay a few KB.
    for path in sorted(ROOT.glob("hardware/profiles/*.yaml")):
        profile = yaml.safe_load(path.read_text(encoding="utf-8"))
        for keep in (2, 5, 12):
            for offset in range(2):
                cut = {}
                for key, value in profile.items():
                    if isinstance(value, dict) and isinstance(value.get("rows"), list):
                        value = dict(value, rows=value["rows"][offset::max(1, len(value["rows"]) // keep)][:keep])
                    cut[key] = value
                text = yaml.safe_dump(cut, sort_keys=False, allow_unicode=True, width=1000)
                write(out / "profile", f"{path.stem}-{keep}-{offset}.yaml", text)

    for index, text in enumerate(sorted(found)):
        for dimension in range(DIMENSIONS):
            folder = out / "unit_parse"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{index:04d}-{dimension}").write_bytes(bytes([dimension]) + text.encode("utf-8"))

    for harness in sorted(p.name for p in out.iterdir()):
        print(f"{harness}: {sum(1 for _ in (out / harness).iterdir())} seeds")


if __name__ == "__main__":
    main()
