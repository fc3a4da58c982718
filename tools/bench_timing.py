"""GPU and host time per call of a backward, with the host kept ahead of the GPU, the same way for every
contender (tools/bench_bwd.py).

A round queues a sleep kernel, the start event, `calls` calls and the stop event, then waits. The sleep
is sized to outlast the issuing of the calls; after issuing, the start event is queried: when it has not
completed, the GPU was still in the sleep when the last call was queued, so the calls ran back to back
and the events measure GPU time only (`ahead`). A round that finds the start event completed is run
again with twice the sleep. The host time of a call is the wall time of issuing it (its Python, the
framework's dispatch, the launches), measured in the same loop: it is what a training step pays on the
CPU, reported beside the GPU time and never inside it.

Several contenders are timed in turn (`interleaved`): round r of every one before round r + 1 of any. A long
row draws the GPU's power for seconds and its clock drifts meanwhile (the rounds of one config 8% apart on
an H200: reports/bench_notes.md); taken in turn, the drift falls on every contender alike.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

SLEEP_MARGIN_S = 0.002   # sleep beyond twice the expected issuing time (the first launches of a round are slower)
ATTEMPTS = 4             # a round whose start event had completed is repeated with twice the sleep, at most this often


@dataclasses.dataclass(frozen=True)
class Round:
    gpu_s: float       # GPU seconds per call (events around the queued calls / calls)
    host_s: float      # host seconds per call (issuing the calls / calls)
    ahead: bool        # the GPU reached the first call only after the last was queued


@dataclasses.dataclass(frozen=True)
class Timing:
    gpu_s: float       # median over rounds of GPU seconds per call
    host_s: float      # median over rounds of host seconds per call
    ahead: bool        # every round kept the host ahead
    rounds: tuple[Round, ...]

    def to_json(self) -> dict:
        return {"gpu_s": self.gpu_s, "host_s": self.host_s, "ahead": self.ahead,
                "rounds": [dataclasses.asdict(r) for r in self.rounds]}


def summarize(rounds: list[Round]) -> Timing:
    """The medians of the rounds, and whether all of them kept the host ahead."""
    if not rounds:
        raise ValueError("summarize needs at least one round")
    return Timing(statistics.median(r.gpu_s for r in rounds), statistics.median(r.host_s for r in rounds),
                  all(r.ahead for r in rounds), tuple(rounds))


def sleep_cycles(host_s: float, calls: int, cycles_per_second: float) -> int:
    """torch.cuda._sleep cycles that outlast issuing `calls` calls of `host_s` each (twice over, plus a margin)."""
    return int((2 * host_s * calls + SLEEP_MARGIN_S) * cycles_per_second)


def sleep_rate(torch) -> float:
    """Cycles per second of torch.cuda._sleep on this GPU."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10 ** 8)
    stop.record()
    stop.synchronize()
    return 10 ** 8 / (start.elapsed_time(stop) / 1e3)


def _round(torch, call, calls: int, cycles: int) -> Round:
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    start.record()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    host = (time.perf_counter() - began) / calls
    ahead = not start.query()
    stop.record()
    stop.synchronize()
    return Round(start.elapsed_time(stop) / 1e3 / calls, host, ahead)


def queued(torch, call, *, calls: int, rounds: int, rate: float, warmup: int = 3) -> Timing:
    """Time `call` (a no-argument callable queueing GPU work on torch's current stream) as the module
    says: `warmup` calls first (module loads, plans, autotuning), then `rounds` rounds of `calls`."""
    return interleaved(torch, {"": call}, calls=calls, rounds=rounds, rate=rate, warmup=warmup)[""]


def interleaved(torch, contenders: dict, *, calls: int, rounds: int, rate: float, warmup: int = 3) -> dict:
    """{name: Timing} of each of `contenders` ({name: call}) as queued times one, their rounds taken in turn."""
    guess = {}
    for name, call in contenders.items():
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        began = time.perf_counter()
        call()
        guess[name] = time.perf_counter() - began   # one issue, to size the first round's sleep
    measured = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, call in contenders.items():
            cycles = sleep_cycles(guess[name], calls, rate)
            for _ in range(ATTEMPTS):
                result = _round(torch, call, calls, cycles)
                if result.ahead:
                    break
                cycles *= 2
            measured[name].append(result)
            guess[name] = max(guess[name], result.host_s)
    return {name: summarize(rounds_of) for name, rounds_of in measured.items()}
