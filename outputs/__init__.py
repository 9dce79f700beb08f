"""fleetplan.outputs: what a plan is written as and read back from: plan files (:mod:`.planio`, their schema in
:mod:`.planfile`), the plan's cost ledger (:mod:`.ledger`) and the what-if workbooks with live formulas
(:mod:`.workbook`)."""
