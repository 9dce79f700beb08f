"""fleetplan.datasets.catalog: the shipped catalogs and user additions, one module per catalog: GPUs (:mod:`.gpus`),
models (:mod:`.models`), GPU prices (:mod:`.prices`), egress prices (:mod:`.egress`); names and aliases
(:mod:`.names`); the rows every catalog reads alike (:mod:`.rows`)."""
