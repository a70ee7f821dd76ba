"""The stored-runs evidence: what the results store holds, as the values the speed model and
the planner read. Above the store and the analysis of runs; the speed model
(:mod:`servelab.predict`) never reads a stored record itself.

Modules: ``runs`` (a stored run -> speed-model samples; the leave-one-model-out ledger of a
store), ``acceptance`` (speculative decode's acceptance length as stored runs measured it),
``sweeps`` (stored concurrency sweeps re-predicted with their model left out: the batched
form's held-out error), ``stored`` (the successful runs of a results database, never
creating one).
"""
