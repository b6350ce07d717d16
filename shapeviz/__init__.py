"""shapeviz: the workload shape of LLM request logs, and what it means for GPUs."""

__version__ = "0.1.0"
