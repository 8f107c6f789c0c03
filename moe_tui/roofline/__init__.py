"""The decode roofline: the most a GPU box can give one model, to put a measured figure in proportion.

`decode` (the roofline at batch B), `inputs` (what it is computed from, read from profiles and the
store), `model_shape` (a MoE model's layer and expert sizes), `gpu_specs` (bandwidth and FLOPs per GPU).
"""
