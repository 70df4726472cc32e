"""The run's files, apart from its physics: diagnostics.h5, escapers.h5, snapshots and
checkpoints (:mod:`cmc.output.files`, :mod:`cmc.output.escapers`), written by rank 0 of a
collective write (:func:`cmc.output.collective.on_root`)."""
