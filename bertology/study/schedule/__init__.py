"""The study's schedule: `make reproduce` and its population and external-checkpoint
variants, the steps each runs and the processes that run them, side by side in lanes."""
