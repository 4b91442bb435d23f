"""The executable edit contract: `dtgen edit` operations on spec files.

`OPERATIONS` maps each operation of schemas/meta.json to its implementation
(`dtgen contract --check` verifies the two agree); `edit_file` applies one, checks the
result against the schema, the rules and every contract invariant, and writes it only
if all hold. Must not import torch.
"""

from .apply import EditRefusal, EditResult, edit_batch, edit_file, error_result
from .args import EditArgumentError, parse_words, usage
from .operations import OPERATIONS

__all__ = ["OPERATIONS", "EditArgumentError", "EditRefusal", "EditResult", "edit_batch", "edit_file", "error_result", "parse_words",
           "usage"]
