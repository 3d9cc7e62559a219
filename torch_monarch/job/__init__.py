"""A job of replica groups, whoever orchestrates it.

:class:`JobConfig` is what a job is (built once from ``monarch-run``'s
flags by :func:`torch_monarch.launch.config.job_config`, or by hand);
:class:`JobBackend` is what an orchestrator does with it. The backends
("embedded", "monarch") are registered in :mod:`torch_monarch.launch.backends`.
"""

from torch_monarch.job.backend import JobBackend
from torch_monarch.job.config import AgentFlags, JobConfig, SchedulerChoice, TrainerSpec

__all__ = ["AgentFlags", "JobBackend", "JobConfig", "SchedulerChoice", "TrainerSpec"]
