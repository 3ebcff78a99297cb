"""The probe pipeline's analyses of a checkpoint's representations: extract features once,
then probes, structural probes, attention, geometry, cloze tests and amnesic probing."""
