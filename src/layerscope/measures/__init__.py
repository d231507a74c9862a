"""The field's per-layer measures, one module per family of formula; plain numpy in, numbers out.

    from layerscope.measures.similarity import cka_matrix                 # CKA, block influence, angular distance
    from layerscope.measures.cka_debiased import debiased_cka_matrix      # CKA from the unbiased HSIC
    from layerscope.measures.spectrum import anisotropy_metrics           # covariance spectrum (anisotropy)
    from layerscope.measures.geometry import uniformity                   # cosine geometry of pooled vectors
    from layerscope.measures.entropy import matrix_entropy                # prompt matrix entropy
    from layerscope.measures.intrinsic import twonn_dimension             # TwoNN intrinsic dimension
    from layerscope.measures.changepoints import piecewise_linear_breaks  # where a profile changes course
    from layerscope.measures.boundaries import bootstrap_boundaries       # one vote per family, with intervals
    from layerscope.measures.probes import probe_states                   # linear probes per state, with controls
    from layerscope.measures.probe_transfer import transfer_states        # probes across domains (leave one out)

Nothing here knows a model, a study or a file: each function takes arrays and returns numbers, and each
module's docstring names its formula's source.
"""
