"""Validation harness for llm-planner: real kernels, naive references and timing.

The harness imports torch; the planner never imports the harness (data flows one way:
kernels -> runner -> records -> calibration YAML).
"""
