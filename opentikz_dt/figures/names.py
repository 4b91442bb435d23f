"""The names the figure templates define: TikZ styles, parameter macros, node names.

One list, in code, so `dtgen contract --check` and the tests can verify that the
contract (schemas/meta.json) and the templates agree. Must not import torch.

Node naming (fixed, as the seed template's edit contract):
  data                the training-data source
  w1..wN              workers, top to bottom (1-based; pipeline: the worker running stage i)
  ps | ps1..psS       the parameter server, or its S shards (central storage: ps)
  h1..hH              hosts (boxes grouping their workers)
  s1..sS              pipeline stages (the stage box drawn above worker w_i)
  ar                  the collective of a native all-reduce (the bar the workers meet in)
  workers             the brace tip standing for all workers when they are elided
  title               the figure title
  w4-more, ps3-more   the ellipsis standing for elided workers / shards / hosts, named
                      after the first member it hides (w4-more: w4..w(N-1))
  psgroup             the box around the shards ps1..psS
  <name>-label        the text label of node <name> (w1-label, ps-label, ...)
Timeline figures name their lane labels <lane>-<panel>-label (w1-sync-label) so a
sync and an async panel can share one picture; panel titles panel-<panel>, the legend
legend-<kind>, the axis title axis-label. Auxiliary names (AUX_NODES): ar (the native
all-reduce), workers (all workers: brace tip or group box), psgroup (box around the
shards), title, note, model (the model note under a topology), legend, axis, panel. Coordinates h1-top / h1-bottom pad host boxes.
"""

from __future__ import annotations

import re

# Styles every topology picture defines (the flows keep the seed's names).
TOPOLOGY_STYLES = ("icon", "slbl", "data", "grad", "wts", "act", "ring", "bus", "barrier", "peer", "hostbox", "psbox",
                   "stagebox", "morebox", "elide", "brace", "ttl")
# Styles of the timeline picture: one per box kind of the trace vocabulary
# (docs/dev/runner-interface.md), plus lanes, axis and panel titles.
# `skipped` is no trace event of its own: an optimizer or update span whose arg `skipped`
# is set (fp16 gradients overflowed, the scaler skipped the step) is drawn as it.
# `wgrad` neither: a `backward` span with arg grad=weight (a zero-bubble schedule's W, the
# weight-gradient half of a split backward); its style is defined only where one is drawn.
BOX_KINDS = ("fetch", "forward", "backward", "wgrad", "slowdown", "optimizer", "update", "skipped", "push",
             "allreduce", "gossip", "send", "recv", "wait")
# The box kind drawn per phase: a collective's phases (reduce-scatter, all-gather, ...) each
# get a style of their own (tl-allreduce, -b, -c) and a legend entry (figures/timeline.py).
PHASED_BOX = "allreduce"
TIMELINE_STYLES = ("slbl", "ttl", "lane", "axis", "tick", "panel") + tuple(f"tl-{kind}" for kind in BOX_KINDS)
STYLES = tuple(dict.fromkeys(TOPOLOGY_STYLES + TIMELINE_STYLES))

# Parameter macros (\def\colsep{...}) the topology template defines, as the seed's contract.
PARAMETERS = ("colsep", "rowsep", "datalabel", "pslabel", "batchlabel", "gradlabel", "weightlabel", "titlelabel")
# Worker label macros follow the seed: \workeronelabel, \workertwolabel, ... (one per drawn worker).
WORKER_LABEL_MACRO = re.compile(r"^worker[a-z]+label$")
# Icon macros, each taking one palette colour name as its argument.
ICON_MACROS = {"gpu": "gpupic", "cpu": "cpupic", "server": "serverpic", "dataset": "datasetpic",
               "database": "databasepic", "none": "nonepic"}

# Semantic nodes: the contract's node_naming patterns (schemas/meta.json).
NODE_PATTERNS = {
    "data": r"data",
    "worker": r"w[1-9][0-9]*",
    "server": r"ps|ps[1-9][0-9]*",
    "host": r"h[1-9][0-9]*",
    "stage": r"s[1-9][0-9]*",
}
# Auxiliary nodes: the all-reduce collective, group boxes and annotations.
AUX_NODES = ("ar", "workers", "psgroup", "title", "note", "model", "legend", "axis", "panel")
_BASE = re.compile(r"^(?:%s)$" % "|".join([f"(?:{p})" for p in NODE_PATTERNS.values()] + list(AUX_NODES)))
_SUFFIX = re.compile(r"^(?:-[a-z0-9]+)*$")


_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_word(n: int) -> str:
    """English words for 0 <= n < 10000 without spaces (TeX macro names take letters only)."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (_ONES[n % 10] if n % 10 else "")
    if n < 1000:
        return _ONES[n // 100] + "hundred" + (number_word(n % 100) if n % 100 else "")
    return number_word(n // 1000) + "thousand" + (number_word(n % 1000) if n % 1000 else "")


def worker_label_macro(worker_id: str) -> str:
    """The label macro of a worker, as the seed: w1 -> workeronelabel."""
    return f"worker{number_word(int(worker_id[1:]))}label"


def is_node_name(name: str) -> bool:
    """True when `name` is a semantic or auxiliary base name plus optional -suffixes
    (w1, w1-label, w4-more, w1-ps-grad-label, w1-sync-label, legend-fetch)."""
    base, _, rest = name.partition("-")
    return bool(_BASE.match(base)) and bool(_SUFFIX.match("-" + rest if rest else ""))
