"""The processes of the step, one module each (the order: :data:`cmc.step.STEP_ORDER`)."""
