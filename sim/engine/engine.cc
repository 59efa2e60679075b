#include "sim/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>

#include "base/check.h"
#include "sim/engine/event_queue.h"

namespace paceline {
namespace {

// What a scheduled event finishes: one rank's task, every member of a rendezvous, or whatever
// the external model has finished by then.
constexpr uint32_t kRendezvous = kNoId;
constexpr uint32_t kWakeup = kNoId - 1;
struct Completion {
  uint32_t rank;     // the rank, or kRendezvous, or kWakeup
  uint32_t id;       // the task, or the rendezvous slot
  uint32_t version;  // a task completion is stale once its stream's version moved on
  // The task's stream: a stale completion is recognised without reading the task.
  StreamId stream = 0;
};

// Tokens the external model knows tasks by.
constexpr uint64_t kRendezvousToken = uint64_t{1} << 63;
uint64_t token_of(uint32_t rank, TaskId task) { return (uint64_t{rank} << 32) | task; }

struct Rendezvous {
  uint32_t expected = 0;
  SimTime duration;
  std::vector<std::pair<uint32_t, TaskId>> members;  // (rank, task) in arrival order
};

// Mutable state of one rank during a run.
struct RankState {
  std::vector<uint32_t> stream_next;          // by stream: position of the next task to start
  std::vector<uint8_t> stream_busy;           // by stream: the next task has started
  std::vector<uint32_t> resource_free;        // by resource: units available
  std::vector<std::deque<TaskId>> resource_waiters;
  // By stream: when its running task started (a stream runs one task at a time).
  std::vector<SimTime> start_times;
  // Interference: running victims' progress, by stream.
  std::vector<uint32_t> version;              // bumped when a running task is rescheduled
  std::vector<double> remaining_ps;           // full-speed work left at `since`
  std::vector<SimTime> since;
  std::vector<uint8_t> victim_running;
  int victims_running = 0;  // streams whose victim_running is set
  // Aggressors running on the rank: how many hold each number of SMs (a few distinct counts).
  std::vector<std::pair<uint16_t, int>> aggressor_sms;
  int sm_holders = 0;     // of those, the ones whose tag is in Interference::sm_holder_tags
  uint16_t most_sms = 0;  // the most SMs a running aggressor holds
  size_t remaining_tasks = 0;
  int64_t memory_bytes = 0;
  int64_t peak_task_added_bytes = 0;  // what outcome.peak_memory_task allocated as it started
  // By allocator pool: the bytes it has handed out, and the most it has at once.
  std::array<int64_t, kMaxAllocatorPools> pool_bytes{};
  std::array<int64_t, kMaxAllocatorPools> pool_peak_bytes{};
  void allocate(uint8_t pool, int64_t bytes) {
    pool_bytes[pool] += bytes;
    pool_peak_bytes[pool] = std::max(pool_peak_bytes[pool], pool_bytes[pool]);
  }
  // Cached blocks of `pool` too small for what it hands out now: reserved beside its live bytes.
  void reserve_beside(uint8_t pool, int64_t cached_bytes) {
    pool_peak_bytes[pool] = std::max(pool_peak_bytes[pool], pool_bytes[pool] + cached_bytes);
  }
  RankOutcome outcome;
};

class RunState {
 public:
  RunState(const std::vector<RankSetup>& ranks, const EngineOptions& options,
           const std::vector<std::vector<uint32_t>>& instances, uint32_t num_instances, ExternalModel* external)
      : setups_(ranks),
        options_(options),
        instances_(instances),
        external_(external),
        ranks_(ranks.size()),
        open_(num_instances) {
    size_t recorded_tasks = 0;
    size_t memory_tasks = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const Program& program = *ranks[r].program;
      PACELINE_CHECK(ranks[r].group_instances.size() >= program.num_slots(),
                     fmt::format("rank {} maps {} group slots; its program uses {}", r,
                                 ranks[r].group_instances.size(), program.num_slots()));
      RankState& state = ranks_[r];
      state.stream_next.assign(program.num_streams(), 0);
      state.stream_busy.assign(program.num_streams(), 0);
      state.version.assign(program.num_streams(), 0);
      state.remaining_ps.assign(program.num_streams(), 0.0);
      state.since.assign(program.num_streams(), SimTime::zero());
      state.victim_running.assign(program.num_streams(), 0);
      for (const Resource& resource : program.resources()) state.resource_free.push_back(resource.capacity);
      state.resource_waiters.resize(program.resources().size());
      state.start_times.assign(program.num_streams(), SimTime::zero());
      state.remaining_tasks = program.num_tasks();
      state.memory_bytes = ranks[r].initial_memory_bytes;
      state.pool_bytes[0] = state.memory_bytes;
      state.pool_peak_bytes = state.pool_bytes;
      state.outcome.peak_memory_bytes = state.memory_bytes;
      if (ranks[r].record_spans) recorded_tasks += program.num_tasks();
      if (ranks[r].record_memory) {
        memory_tasks += program.num_tasks();
        result_.memory.push_back(
            MemorySample{static_cast<uint32_t>(r), SimTime::zero(), state.memory_bytes});
      }
    }
    result_.spans.reserve(recorded_tasks);
    result_.memory.reserve(result_.memory.size() + 2 * memory_tasks);
  }

  RunResult run() {
    // Every stream's first task may be ready at time zero.
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      const Program& program = *setups_[r].program;
      for (StreamId s = 0; s < program.num_streams(); ++s) {
        const auto tasks = program.stream_tasks(s);
        if (!tasks.empty()) try_issue(r, tasks.front());
      }
    }
    schedule_wakeup();
    while (!queue_.empty()) {
      if (options_.max_events != 0 && result_.events >= options_.max_events) {
        throw SimulationLimitError(fmt::format(
            "the simulation reached its limit of {} events at simulated time {:.6f} s", options_.max_events,
            to_seconds(now_) / Seconds(1)));
      }
      // The wall clock and the stop flag only abort; they are read every 4096 events and never
      // reach the schedule.
      if ((result_.events & 4095) == 0) stop_if_asked(options_.stop, "the simulation");
      if (options_.deadline && (result_.events & 4095) == 0 && std::chrono::steady_clock::now() > *options_.deadline) {
        throw SimulationDeadlineError(
            fmt::format("the simulation ran past its wall-clock deadline after {} events, at simulated time {:.6f} s",
                        result_.events, to_seconds(now_) / Seconds(1)),
            result_.events);
      }
      auto event = queue_.pop();
      now_ = event.time;
      const Completion& c = event.payload;
      if (c.rank == kWakeup) {
        if (c.version != wakeup_version_) continue;  // the model's next time moved
        ++result_.events;
        wake_external();
      } else if (c.rank == kRendezvous) {
        ++result_.events;
        complete_rendezvous(c.id);
      } else {
        if (c.version != ranks_[c.rank].version[c.stream]) continue;  // rescheduled since
        ++result_.events;
        complete(c.rank, c.id);
      }
      schedule_wakeup();
    }
    check_all_finished();
    result_.ranks.reserve(ranks_.size());
    for (RankState& state : ranks_) {
      state.outcome.final_memory_bytes = state.memory_bytes;
      for (const int64_t peak : state.pool_peak_bytes) state.outcome.peak_reserved_bytes += peak;
      result_.end = std::max(result_.end, state.outcome.finish);
      result_.ranks.push_back(state.outcome);
    }
    return std::move(result_);
  }

 private:
  const Program& program(uint32_t rank) const { return *setups_[rank].program; }

  void record_memory(uint32_t rank) {
    if (setups_[rank].record_memory) {
      result_.memory.push_back(MemorySample{rank, now_, ranks_[rank].memory_bytes});
    }
  }

  // Streams run in order, so a task has finished exactly when its stream has moved past it:
  // the rank's few stream positions say which tasks are done, with no state per task.
  static bool dependencies_finished(const RankState& state, const Program& p, TaskId task) {
    for (const Program::StreamPosition& d : p.dependency_positions(task)) {
      if (state.stream_next[d.stream] <= d.position) return false;
    }
    return true;
  }

  // Starts `task` if it heads its idle stream and its dependencies have finished.
  void try_issue(uint32_t rank, TaskId task) {
    RankState& state = ranks_[rank];
    const Program& p = program(rank);
    const Task& t = p.kind(task);
    // The stream is checked first: it is the cheaper test, and it spares reading the
    // dependencies of a task that is not yet at its stream's head.
    if (state.stream_busy[t.stream] || state.stream_next[t.stream] != p.stream_position(task)) return;
    if (!dependencies_finished(state, p, task)) return;
    state.stream_busy[t.stream] = 1;
    if (t.resource != kNoId) {
      if (state.resource_free[t.resource] == 0) {
        state.resource_waiters[t.resource].push_back(task);
        return;
      }
      --state.resource_free[t.resource];
    }
    begin(rank, task);
  }

  // The task holds its stream (and resource): start it, or join its rendezvous.
  void begin(uint32_t rank, TaskId task) {
    RankState& state = ranks_[rank];
    const Task& t = program(rank).kind(task);
    const SyncId sync = program(rank).sync(task);
    const int64_t added_bytes = t.alloc_at_start_bytes + t.transient_bytes;
    state.memory_bytes += added_bytes;
    if (t.alloc_at_start_bytes != 0) state.allocate(t.alloc_pool, t.alloc_at_start_bytes);
    if (t.transient_bytes != 0) state.allocate(t.transient_pool, t.transient_bytes);
    if (t.stranded_bytes != 0) state.reserve_beside(t.transient_pool, t.stranded_bytes);
    if (state.memory_bytes > state.outcome.peak_memory_bytes) {
      // Of the tasks that start at the peak's instant, the peak is the doing of the one that
      // allocates the most, not of whichever the event order starts last.
      if (now_ != state.outcome.peak_memory_time || added_bytes >= state.peak_task_added_bytes) {
        state.outcome.peak_memory_task = task;
        state.peak_task_added_bytes = added_bytes;
      }
      state.outcome.peak_memory_bytes = state.memory_bytes;
      state.outcome.peak_memory_time = now_;
    }
    record_memory(rank);
    state.start_times[t.stream] = now_;
    if (sync == kNoId) {
      start_running(rank, t);
      if (t.external) {
        const TaskRef member{rank, task};
        external().start(now_, token_of(rank, task), std::span<const TaskRef>(&member, 1));
      } else {
        schedule_completion(rank, task, t);
      }
      return;
    }
    arrive(rank, task, program(rank).syncs()[sync]);
  }

  ExternalModel& external() {
    PACELINE_CHECK(external_ != nullptr, "an external task without an external model");
    return *external_;
  }

  bool is_victim(uint8_t tag) const { return (options_.interference.victim_tags >> tag) & 1; }
  bool holds_sms(uint8_t tag) const { return (options_.interference.sm_holder_tags >> tag) & 1; }
  // Whether any aggressor could ever slow `t`.
  bool may_slow(const Task& t) const {
    const Interference& i = options_.interference;
    const bool persistent = i.persistent_slowdown > 0.0 && t.persistent_duration > SimTime::zero();
    return is_victim(t.tag) && (i.slowdown > 0.0 || persistent);
  }
  static uint16_t most_sms_held(const RankState& state) {
    uint16_t most = 0;
    for (const auto& [sms, running] : state.aggressor_sms) {
      if (running > 0) most = std::max(most, sms);
    }
    return most;
  }
  // The speed of victim `t` while aggressors holding at most `sms` SMs run beside it,
  // `sm_holders` of them in sm_holder_tags.
  double rate(uint16_t sms, int sm_holders, const Task& t) const {
    const Interference& i = options_.interference;
    const double slowdown = i.slowdown_beside(sms);
    if (sm_holders > 0 && t.persistent_duration > SimTime::zero()) {
      const double persistent_share = static_cast<double>(t.persistent_duration.picoseconds()) /
                                      static_cast<double>(t.duration.picoseconds());
      return 1.0 / (1.0 + slowdown + persistent_share * (i.persistent_slowdown - slowdown));
    }
    return 1.0 / (1.0 + slowdown);
  }
  double rate(const RankState& state, const Task& t) const {
    return rate(state.most_sms, state.sm_holders, t);
  }

  // A local task takes `duration` at full speed; a victim of interference may take longer.
  void schedule_completion(uint32_t rank, TaskId task, const Task& t) {
    RankState& state = ranks_[rank];
    if (!may_slow(t)) {
      queue_.push(now_ + t.duration, Completion{rank, task, state.version[t.stream], t.stream});
      return;
    }
    state.victim_running[t.stream] = 1;
    ++state.victims_running;
    state.remaining_ps[t.stream] = static_cast<double>(t.duration.picoseconds());
    state.since[t.stream] = now_;
    reschedule(rank, t.stream, task, t);
  }

  // Schedules the completion of victim `task` (`t` its kind) at the rate it now runs.
  void reschedule(uint32_t rank, StreamId stream, TaskId task, const Task& t) {
    RankState& state = ranks_[rank];
    const int64_t left = std::llround(state.remaining_ps[stream] / rate(state, t));
    queue_.push(now_ + SimTime::from_picoseconds(left),
                Completion{rank, task, ++state.version[stream], stream});
  }

  // Aggressors starting and ending change the speed of the rank's running victims.
  void start_running(uint32_t rank, const Task& t) {
    if (t.sms > 0) change_aggressors(rank, t, +1);
  }
  void stop_running(uint32_t rank, const Task& t) {
    RankState& state = ranks_[rank];
    if (state.victim_running[t.stream]) {
      state.victim_running[t.stream] = 0;
      --state.victims_running;
    }
    if (t.sms > 0) change_aggressors(rank, t, -1);
  }
  void change_aggressors(uint32_t rank, const Task& aggressor, int delta) {
    RankState& state = ranks_[rank];
    const uint16_t sms_before = state.most_sms;
    const int sm_holders_before = state.sm_holders;
    auto held = std::find_if(state.aggressor_sms.begin(), state.aggressor_sms.end(),
                             [&](const auto& entry) { return entry.first == aggressor.sms; });
    if (held == state.aggressor_sms.end()) held = state.aggressor_sms.insert(held, {aggressor.sms, 0});
    held->second += delta;
    if (holds_sms(aggressor.tag)) state.sm_holders += delta;
    state.most_sms = most_sms_held(state);
    const uint16_t sms_after = state.most_sms;
    // Rates depend only on the most SMs held and on whether any SM holder runs.
    if (sms_before == sms_after && (sm_holders_before > 0) == (state.sm_holders > 0)) return;
    if (state.victims_running == 0) return;
    const Program& p = program(rank);
    for (StreamId s = 0; s < p.num_streams(); ++s) {
      if (!state.victim_running[s]) continue;
      const TaskId victim = p.stream_tasks(s)[state.stream_next[s]];
      const Task& v = p.kind(victim);
      const double old_rate = rate(sms_before, sm_holders_before, v);
      if (old_rate == rate(sms_after, state.sm_holders, v)) continue;
      state.remaining_ps[s] -= static_cast<double>((now_ - state.since[s]).picoseconds()) * old_rate;
      state.remaining_ps[s] = std::max(0.0, state.remaining_ps[s]);
      state.since[s] = now_;
      reschedule(rank, s, victim, v);
    }
  }

  void schedule_wakeup() {
    if (external_ == nullptr) return;
    const SimTime next = external_->next_time();
    if (next == SimTime::max() || next == scheduled_wakeup_) return;
    scheduled_wakeup_ = next;
    queue_.push(next, Completion{kWakeup, 0, ++wakeup_version_});
  }

  void wake_external() {
    scheduled_wakeup_ = SimTime::max();
    finished_.clear();
    external_->advance(now_, finished_);
    for (const uint64_t token : finished_) {
      if (token & kRendezvousToken) {
        complete_rendezvous(static_cast<uint32_t>(token & ~kRendezvousToken));
      } else {
        complete(static_cast<uint32_t>(token >> 32), static_cast<TaskId>(token & 0xffffffffu));
      }
    }
  }

  void arrive(uint32_t rank, TaskId task, const SyncPoint& sync) {
    // Each group instance has few rendezvous open at once: a short list, scanned.
    std::vector<std::pair<uint32_t, uint32_t>>& open = open_[instances_[rank][sync.slot]];
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& e) { return e.first == sync.sequence; });
    if (it == open.end()) {
      const uint32_t fresh = acquire_rendezvous();
      rendezvous_[fresh].expected = sync.members;
      open.emplace_back(sync.sequence, fresh);
      it = open.end() - 1;
    }
    const uint32_t slot = it->second;
    Rendezvous& meeting = rendezvous_[slot];
    PACELINE_CHECK(meeting.expected == sync.members,
                   fmt::format("rank {} joins a rendezvous of {} members expecting {}", rank,
                               meeting.expected, sync.members));
    meeting.members.emplace_back(rank, task);
    meeting.duration = std::max(meeting.duration, program(rank).kind(task).duration);
    if (meeting.members.size() == meeting.expected) {
      open.erase(it);
      // A rendezvous runs from the last arrival: members that waited start now.
      for (const auto& [member_rank, member_task] : meeting.members) {
        const Task& member = program(member_rank).kind(member_task);
        ranks_[member_rank].start_times[member.stream] = now_;
        start_running(member_rank, member);
      }
      if (program(rank).kind(task).external) {
        std::vector<TaskRef> members;
        for (const auto& [member_rank, member_task] : meeting.members) members.push_back({member_rank, member_task});
        external().start(now_, kRendezvousToken | slot, members);
      } else {
        queue_.push(now_ + meeting.duration, Completion{kRendezvous, slot, 0});
      }
    }
  }

  uint32_t acquire_rendezvous() {
    if (!free_rendezvous_.empty()) {
      const uint32_t slot = free_rendezvous_.back();
      free_rendezvous_.pop_back();
      return slot;
    }
    rendezvous_.emplace_back();
    return static_cast<uint32_t>(rendezvous_.size() - 1);
  }

  void complete_rendezvous(uint32_t slot) {
    // The member list is moved out because completing a member may open new rendezvous and
    // grow the pool; the slot is reused only after every member has completed.
    std::vector<std::pair<uint32_t, TaskId>> members = std::move(rendezvous_[slot].members);
    for (const auto& [rank, task] : members) complete(rank, task);
    members.clear();
    rendezvous_[slot] = Rendezvous{0, SimTime::zero(), std::move(members)};
    free_rendezvous_.push_back(slot);
  }

  void complete(uint32_t rank, TaskId task) {
    RankState& state = ranks_[rank];
    const Program& p = program(rank);
    const Task& t = p.kind(task);
    stop_running(rank, t);
    state.memory_bytes -= t.free_at_end_bytes + t.transient_bytes;
    if ((t.transient_bytes | t.free_at_end_bytes) != 0) {
      state.pool_bytes[t.transient_pool] -= t.transient_bytes;
      state.pool_bytes[t.free_pool] -= t.free_at_end_bytes;
    }
    record_memory(rank);
    if (setups_[rank].record_spans) {
      result_.spans.push_back(TaskSpan{rank, task, state.start_times[t.stream], now_});
    }
    state.outcome.finish = now_;
    --state.remaining_tasks;

    // The stream moves on; a released resource unit goes to the longest waiter.
    state.stream_busy[t.stream] = 0;
    ++state.stream_next[t.stream];
    if (t.resource != kNoId) {
      auto& waiters = state.resource_waiters[t.resource];
      if (waiters.empty()) {
        ++state.resource_free[t.resource];
      } else {
        const TaskId next = waiters.front();
        waiters.pop_front();
        begin(rank, next);
      }
    }
    const auto stream = p.stream_tasks(t.stream);
    if (state.stream_next[t.stream] < stream.size()) try_issue(rank, stream[state.stream_next[t.stream]]);
    for (const TaskId dependent : p.dependents(task)) {
      try_issue(rank, dependent);
    }
  }

  void check_all_finished() const {
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      const RankState& state = ranks_[r];
      if (state.remaining_tasks == 0) continue;
      const Program& p = program(r);
      for (StreamId s = 0; s < p.num_streams(); ++s) {
        const auto tasks = p.stream_tasks(s);
        if (state.stream_next[s] >= tasks.size()) continue;
        const TaskId stuck = tasks[state.stream_next[s]];
        const char* reason = !dependencies_finished(state, p, stuck) ? "waits for a dependency"
                             : p.sync(stuck) != kNoId            ? "waits for a rendezvous"
                                                                 : "waits for a resource";
        fail_check("deadlock", __FILE__, __LINE__,
                   fmt::format("rank {} stream '{}' task {} (label {}) {} that never comes; {} tasks unfinished",
                               r, p.stream_name(s), stuck, p.task(stuck).label, reason,
                               state.remaining_tasks));
      }
    }
  }

  const std::vector<RankSetup>& setups_;
  const EngineOptions& options_;
  const std::vector<std::vector<uint32_t>>& instances_;
  ExternalModel* external_;
  std::vector<RankState> ranks_;
  EventQueue<Completion> queue_;
  SimTime now_;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> open_;  // by instance: (sequence, rendezvous)
  std::vector<Rendezvous> rendezvous_;
  std::vector<uint32_t> free_rendezvous_;
  SimTime scheduled_wakeup_ = SimTime::max();
  uint32_t wakeup_version_ = 0;
  std::vector<uint64_t> finished_;
  RunResult result_;
};

}  // namespace

Engine::Engine(std::vector<RankSetup> ranks, EngineOptions options)
    : ranks_(std::move(ranks)), options_(options) {
  std::vector<uint32_t> used;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    PACELINE_CHECK(ranks_[r].program != nullptr, fmt::format("rank {} has no program", r));
    used.insert(used.end(), ranks_[r].group_instances.begin(), ranks_[r].group_instances.end());
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  num_instances_ = static_cast<uint32_t>(used.size());
  dense_instances_.resize(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (const uint32_t instance : ranks_[r].group_instances) {
      dense_instances_[r].push_back(
          static_cast<uint32_t>(std::lower_bound(used.begin(), used.end(), instance) - used.begin()));
    }
  }
}

RunResult Engine::run(ExternalModel* external) const {
  RunState state(ranks_, options_, dense_instances_, num_instances_, external);
  return state.run();
}

}  // namespace paceline
