// Import of a Hugging Face transformers `config.json` as a ModelSpec.
//
// Understands the field names of the Llama, Mistral/Mixtral, Qwen2, Qwen3, Qwen3-MoE, GPT-2 and
// GPT-NeoX families (hidden_size/n_embd, num_hidden_layers/n_layer, num_key_value_heads, ...),
// chosen by `model_type`. An unknown model_type or a missing required field is an InputError
// naming the file and field.
#ifndef PACELINE_MODELS_HF_CONFIG_H_
#define PACELINE_MODELS_HF_CONFIG_H_

#include <string>

#include "models/model_spec.h"

namespace paceline {

ModelSpec load_hf_config(const std::string& path);
// The same from JSON text; `name` stands for the file in errors and names the model.
ModelSpec parse_hf_config(const std::string& json_text, const std::string& name);

}  // namespace paceline

#endif  // PACELINE_MODELS_HF_CONFIG_H_
