"""refbench: tell, with evidence, whether a change made a Go storage tool faster or slower."""

__version__ = "0.1.0"
