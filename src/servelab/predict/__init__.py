"""The speed model: how long a token takes, fitted from measurements, with an interval.

One concept per module, imported in this order (each only from those above it)::

    form      the cost terms and the time one row of them takes (Sample, features, row_seconds)
    solver    coefficients from samples of the form (bounded, prior-pulled least squares)
    levels    where a fit's samples come from (stored runs, shipped priors, pooled, roofline)
              and the interval it carries (Fit, Calibration, calibrate, interval)
    priors    the shipped priors table (priors.toml: published measurements with sources)
    ledger    leave-one-model-out predictions against measurements
    roofline  the roofline as coefficients: the physical prior and the lower bound
    spec      one speculative-decoding step in the decode form
    speed     a plan's decode / prefill / speculative predictions with their intervals
    runs      stored runs -> samples; the calibration and ledger of a results store

The modules up to ``ledger`` import nothing of servelab but ``errors``; ``roofline``, ``spec``
and ``speed`` read plan arithmetic (:mod:`servelab.plan.weights`, :mod:`servelab.plan.costs`);
``runs`` reads the plan documents and records stored with runs.
"""
