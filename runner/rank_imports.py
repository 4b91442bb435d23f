"""What the fork server (runner/forkserver.py) imports once for every rank on the CPU.

The environment is recorded last, after torch has set what it sets on import (its compile
cache folder): a rank compares its own with it to tell what the elastic launcher set for
it (forkserver.adopt_launch_environment).
"""

import os

import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.optim imports it at a rank's first step)
import torch.distributed  # noqa: F401
import torch.optim  # noqa: F401

from . import worker  # noqa: F401

SERVER_ENV = dict(os.environ)
