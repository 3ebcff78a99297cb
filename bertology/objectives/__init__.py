"""Pretraining objectives: each builds a collate(examples)->batch and a loss(model, batch).

OBJECTIVES is the one dispatch table; `objective.name` in conf/objective/*.yaml selects from it.
"""

from bertology.objectives import electra, mlm, nsp, span

OBJECTIVES = {
    "mlm": mlm.build,
    "mlm_nsp": nsp.build_nsp,
    "mlm_sop": nsp.build_sop,
    "span_sbo": span.build,
    "electra": electra.build,
}
