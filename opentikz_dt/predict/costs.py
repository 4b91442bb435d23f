"""Durations (µs) of every piece of a step, from a calibration and the spec.

`Costs` is what the simulator asks: forward/backward of a range of blocks for some
samples, optimizer and server update, messages and collectives: the costs of mechanisms
(compute per block and sample, a message's latency + bytes x beta, a collective's steps,
the untraced time per step). Options for what-if predictions: `link` (bytes/s between
workers, e.g. 10 Gbit/s) replaces the calibrated bandwidth, `latency_s` the calibrated
latency. `jitter` (a random.Random) makes synthetic runs noisy; predictions are
deterministic. Which of a calibration's costs another strategy gets is transfer.py's:
`p2p_alpha_s` replaces a message latency solved from a step time by the traced one, and
`untraced_s` replaces the calibrated untraced time per step (its floor).

What processes sharing a machine wait for one is not here: `contention` (contention.py)
slows compute by the processes computing at once and adds what a message or a
collective's step waits, and Costs asks it wherever a mechanism runs; without one, the
calibration's own (Contention.as_measured). Must not import torch.
"""

from __future__ import annotations

import math
import re

from ..errors import UsageError
from .blocks import model_blocks
from .calibration import Calibration
from .contention import Contention

_LINK = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(k|m|g|t)?(bit|b|bps|byte)?(?:/s)?\s*$", re.IGNORECASE)


def parse_link(text: str) -> float:
    """'10gbit' -> bytes/s. Accepts kbit/mbit/gbit/tbit and kb/mb/gb (bytes)."""
    match = _LINK.match(str(text))
    if not match:
        from .presets import names_line

        raise UsageError(f"--link: {text!r} is not a bandwidth (e.g. 10gbit, 100mbit, 1gb) nor a preset; "
                         f"{names_line()}")
    value = float(match.group(1)) * {None: 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[
        (match.group(2) or "").lower() or None]
    unit = (match.group(3) or "bit").lower()
    rate = value / 8 if unit in ("bit", "bps") else value
    if rate <= 0:
        raise UsageError(f"--link: {text!r} must be more than 0")
    return rate


# dtgen's pipelined tree all-reduce: chunks of 1 MiB of float32, at most 64
# (runner/strategies/collectives.py CHUNK_ELEMS, MAX_CHUNKS)
TREE_CHUNK, TREE_MAX = (1 << 18) * 4, 64


def tree_chunks(nbytes: float) -> int:
    """The chunks dtgen's tree all-reduce cuts `nbytes` into."""
    return max(1, min(TREE_MAX, math.ceil(nbytes / TREE_CHUNK)))


def tree_levels(n: int) -> int:
    """The levels below the root of dtgen's binary tree over n ranks, a heap (position p's
    children are 2p + 1 and 2p + 2): floor(log2 n), its deepest leaf's depth."""
    return max(0, int(n).bit_length() - 1)


class Costs:
    def __init__(self, cal: Calibration, spec, link: float | None = None, latency_s: float | None = None,
                 jitter=None, untraced_s: float | None = None, p2p_alpha_s: float | None = None,
                 contention: Contention | None = None):
        self.cal, self.spec = cal, spec
        d = cal.data
        self.blocks = model_blocks(spec)
        self.fwd_fit = [tuple(b["forward"]) for b in d["compute"]["blocks"]]
        self.bwd_fit = [tuple(b["backward"]) for b in d["compute"]["blocks"]]
        self.opt_fit = tuple(d["compute"]["optimizer"])
        self.add_s = d["compute"]["add_per_param_s"]
        self.overhead_us = d["compute"]["step_overhead_s"] * 1e6
        # after an update an async server packs and sends the weights, untraced (optional key)
        self.server_us = float(d["compute"].get("server_overhead_s", 0.0)) * 1e6
        self.contention = contention if contention is not None else Contention.as_measured(
            cal, spec, wire=link is not None, latency_given=latency_s is not None)
        self.comm = {}
        self.wire = link is not None  # a given link: a collective's steps each cross it
        for kind in ("p2p", "allreduce", "broadcast", "reduce"):
            alpha, beta = cal.comm(kind)
            if kind == "p2p" and p2p_alpha_s is not None:  # the traced latency (transfer.carried_latency)
                alpha = p2p_alpha_s
            alpha = self.contention.latency(kind, alpha)
            if link is not None:
                beta = 1.0 / link
            if latency_s is not None:
                alpha = latency_s
            self.comm[kind] = (alpha * 1e6, beta * 1e6)
        self.probed = cal.probed
        self.probed_used = False  # a probed collective's cost was asked for (the interval's probe_ends)
        self.rng = jitter
        self._cache: dict = {}
        noise = d.get("noise") or {}
        self.ratios = [float(r) for r in noise.get("compute_ratios", []) if r > 0]
        self.overheads = [1e6 * float(v) for v in noise.get("overhead_s", []) if v >= 0]
        self.exchange_ratios = [float(r) for r in noise.get("exchange_ratios", []) if r > 0]
        # one message's spread (a ring calibration's hops): a gossip exchange carried from it
        # draws each receive from it (noisy_exchange)
        self.message_ratios = [float(r) for r in noise.get("message_ratios", []) if r > 0]
        if untraced_s is not None:  # its floor alone: another strategy, or a core per rank (transfer.py)
            self.overhead_us, self.overheads = untraced_s * 1e6, []
        self.overhead_us, self.overheads = self.contention.untraced(self.overhead_us, self.overheads)
        self.upper = None  # Costs whose simulation is the interval's upper end (predict.py, interval.py)
        self.upper_holds = ""  # what the upper end carries that this prediction does not
        # Costs with each probed collective's fastest and slowest round of the probe (predict.py):
        # the interval holds their simulations where the prediction used a probed collective
        self.probe_ends: list = []
        self.draw = None
        if self.rng is None and (self.ratios or self.overheads or self.exchange_ratios or self.message_ratios):
            import random

            self.draw = random.Random(0)  # seeded: a prediction is reproducible

    # ------------------------------------------------------------ noise (synthetic runs only)
    def noisy(self, us: float, step: int) -> float:
        """A duration as one step sees it: synthetic jitter, or a draw from the calibrated
        spread (a step is sometimes preempted; sync strategies pay the
        slowest worker's draw, so the spread matters, not only the mean)."""
        if self.rng is not None:
            return us * (4.0 if step == 0 else 1.0) * self.rng.uniform(0.85, 1.25)
        if self.ratios:
            return us * self.ratios[self.draw.randrange(len(self.ratios))]
        return us

    def noisy_comm(self, us: float, step: int) -> float:
        """A collective's duration: synthetic jitter only. Its calibrated cost is already the
        in-run mean including waits for peers, which the simulator adds again from the spread
        of each rank's arrival; drawing the spread here too would count it twice."""
        if self.rng is not None:
            return self.noisy(us, step)
        return us

    def noisy_exchange(self, us: float, step: int, receives: int = 1) -> float:
        """A point-to-point exchange once every peer is there (gossip): a draw from the
        calibrated spread. Ranks whose exchange ran long start their next step late and keep
        their neighbours waiting then, which a constant cost would never show. A calibration
        of another strategy holds no exchange, but a ring's holds its messages' spread: each
        of the exchange's `receives` draws its share from it (measured: a ring calibration's
        gossip prediction -34% with the exchange constant, its exchanges' mean 2.19 ms
        against 1.37 and their 80 % quantile 3.48 ms)."""
        if self.rng is not None:
            return self.noisy(us, step)
        if self.exchange_ratios:
            return us * self.exchange_ratios[self.draw.randrange(len(self.exchange_ratios))]
        if self.message_ratios:
            draws = [self.message_ratios[self.draw.randrange(len(self.message_ratios))] for _ in range(receives)]
            return us * sum(draws) / receives
        return us

    def overhead(self, step: int) -> float:
        """Untraced time before a step (Python, batch gathering, preemption); none before step 0."""
        if step == 0:
            return 0.0
        if self.overheads and self.draw is not None:
            return self.overheads[self.draw.randrange(len(self.overheads))]
        return self.noisy(self.overhead_us, step) if self.rng is not None else self.overhead_us

    # ------------------------------------------------------------ compute
    def forward(self, samples: float, lo: int = 0, hi: int | None = None, active: int = 1) -> float:
        return self._blocks(self.fwd_fit, samples, lo, hi, active)

    def backward(self, samples: float, lo: int = 0, hi: int | None = None, active: int = 1) -> float:
        return self._blocks(self.bwd_fit, samples, lo, hi, active)

    def set_duty(self, duty: float) -> None:
        """The share of the time a rank computes (simulate.settle_duty), for the contention
        layer's compute share: the cached compute is forgotten."""
        self.contention.set_duty(duty)
        self._cache.clear()

    def _blocks(self, fits, samples, lo, hi, active) -> float:
        key = (id(fits), samples, lo, hi, active)  # asked once per rank and step: cache
        value = self._cache.get(key)
        if value is None:
            hi = len(fits) if hi is None else hi
            value = self._cache[key] = (self.contention.share(active) * 1e6
                                        * sum(c0 + c1 * samples for c0, c1 in fits[lo:hi]))
        return value

    def optimizer(self, params: int, tensors: int, active: int = 1) -> float:
        c0, c1 = self.opt_fit
        return self.contention.share(active) * 1e6 * (c0 * tensors + c1 * params)

    def update(self, params: int, tensors: int, grads: int) -> float:
        """A server summing `grads` gradients and taking one optimizer step."""
        return 1e6 * self.add_s * params * grads + self.optimizer(params, tensors)

    # ------------------------------------------------------------ communication
    def p2p(self, nbytes: float) -> float:
        alpha, beta = self.comm["p2p"]
        return alpha + self.contention.on_wire(nbytes * beta, self.contention.p2p_wait)

    def p2p_bytes(self, nbytes: float) -> float:
        """The bandwidth part alone (a message queued behind others on one link)."""
        return nbytes * self.comm["p2p"][1]

    def step_alpha(self, kind: str, active: int | None) -> float:
        """A collective step's latency (µs), with its wait for a core where the probe measured
        it and `active` processes (default: every rank) are runnable meanwhile (the contention
        layer's probed_wait)."""
        if kind in self.probed:
            self.probed_used = True
        return self.comm[kind][0] + self.contention.probed_wait(kind, active)

    def allreduce(self, nbytes: float, n: int, active: int | None = None) -> float:
        if n <= 1:
            return 0.0
        beta = self.comm["allreduce"][1]
        if self.wire:  # each of its 2(n - 1) steps moves a 1/n segment
            per_step = self.contention.on_wire(nbytes / n * beta, self.contention.step_wait("allreduce", active))
            return 2 * (n - 1) * (self.step_alpha("allreduce", active) + per_step)
        return 2 * (n - 1) * self.step_alpha("allreduce", active) + 2 * (n - 1) / n * nbytes * beta

    def ring_hop(self, nbytes: float, n: int) -> float:
        """One hop of dtgen's ring all-reduce over n ranks: a 1/n segment sent and added."""
        seg = nbytes / n
        return self.p2p(seg) + 1e6 * self.add_s * seg / 4

    def ring_allreduce(self, nbytes: float, n: int) -> float:
        """dtgen's ring all-reduce over n ranks, all ranks ready at once: 2(n - 1) hops."""
        return 2 * (n - 1) * self.ring_hop(nbytes, n) if n > 1 else 0.0

    def tree_pass(self, nbytes: float, n: int, down: bool = False) -> float:
        """One pass (the reduce up, or the broadcast `down`) of dtgen's pipelined binary tree
        over n ranks, all ranks ready at once: the sum of its chunk hops (tree_hops)."""
        return sum(self.tree_hops(nbytes, n, down))

    def tree_hops(self, nbytes: float, n: int, down: bool = False) -> list:
        """The chunk hops of one pass of dtgen's pipelined binary tree over n ranks, in order
        (µs each): levels + chunks - 1 of them, a parent's link shared by its children (2, or
        the root's 1 of a 2-rank tree), chunk by chunk. A hop's wait for a core counts the
        ranks runnable then (the contention layer's wait_off): going up, the leaves that sent
        their last chunk block until the broadcast, so the last levels run with half, a
        quarter, ... of the ranks; coming down, the ranks below the broadcast's front are
        blocked."""
        if n <= 1:
            return []
        chunks = tree_chunks(nbytes)
        levels = tree_levels(n)
        children = min(2, n - 1)
        if down:
            shares = [min(n, 2 ** (j + 2) - 1) / n for j in range(levels)] + [1.0] * (chunks - 1)
        else:
            shares = [1.0] * chunks + [max(1.0, n / 2 ** j) / n for j in range(1, levels)]
        per = self.p2p(nbytes / chunks) + (children - 1) * self.p2p_bytes(nbytes / chunks)
        return [per - self.contention.wait_off(share) for share in shares]

    def broadcast(self, nbytes: float, n: int, active: int | None = None) -> float:
        beta = self.comm["broadcast"][1]
        return 0.0 if n <= 1 else math.ceil(math.log2(n)) * (self.step_alpha("broadcast", active) + nbytes * beta)

    def reduce(self, nbytes: float, n: int, active: int | None = None) -> float:
        beta = self.comm["reduce"][1]
        return 0.0 if n <= 1 else math.ceil(math.log2(n)) * (self.step_alpha("reduce", active) + nbytes * beta)

