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
    costs     bytes read and FLOPs per decode token and per prompt
    speed     a plan's decode / prefill / speculative predictions with their intervals
    calibration  a build's fits from samples (stored runs' and the priors') on a hardware

The modules up to ``ledger`` import nothing of servelab but ``errors``; ``roofline``, ``spec``,
``costs`` and ``speed`` read sizing arithmetic (:mod:`servelab.sizing.weights`); ``specstep``
reads costs' expert fraction. Stored runs reach the speed model as samples, through
:mod:`servelab.evidence.runs`; nothing here reads the results store.
"""
