"""The speed model: how long a token takes, fitted from measurements, with an interval.

One concept per module, imported in this order (each only from those above it)::

    form      the cost terms and the time one row of them takes (Sample, features, row_seconds)
    solver    coefficients from samples of the form (bounded, prior-pulled least squares)
    levels    where a fit's samples come from (stored runs, shipped priors, pooled, roofline)
              and the interval it carries (Fit, Calibration, calibrate, interval)
    priors    the shipped priors table (priors.toml: published measurements with sources)
    ledger    leave-one-model-out predictions against measurements
    roofline  the roofline as coefficients: the physical prior and the lower bound
    specstep  one speculative step by its parts (verify k+1 tokens, draft passes) and the
              draft term fitted from measured steps (pure numbers)
    spec      a checkpoint's speculative step, its draft term's levels and its prediction
    speed     a plan's decode / prefill / speculative predictions with their intervals
    runs      stored runs -> samples; the calibration and ledger of a results store

The modules up to ``ledger`` import nothing of servelab but ``errors``; ``roofline``, ``spec``
and ``speed`` read plan arithmetic (:mod:`servelab.plan.weights`, :mod:`servelab.plan.costs`);
``specstep`` reads plan.costs' expert fraction; ``runs`` reads the plan documents and records
stored with runs.
"""
