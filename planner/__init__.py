"""llm-planner: a roofline performance model and capacity planner for LLM inference.

`estimate(model, hardware, ...)` is the entry point; see README.md. Importing this package loads no torch,
streamlit or pandas.
"""

from .errors import PlannerError
from .estimate import Estimate, estimate

__all__ = ["Estimate", "PlannerError", "estimate"]
__version__ = "0.1.0"
