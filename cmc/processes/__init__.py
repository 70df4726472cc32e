"""The processes of the step, one module each (the order: :func:`cmc.step.step_order`)."""
