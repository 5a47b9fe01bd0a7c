from sums.taskset import SumsTaskset

__all__ = ["SumsTaskset"]
