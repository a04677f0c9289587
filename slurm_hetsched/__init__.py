"""slurm-hetsched: heterogeneity-aware GPU scheduling for Slurm clusters."""

__version__ = "0.1.0"
