"""torch_xla._dynamo on lazytpu: the bridge PyTorch's ``openxla`` dynamo
backend calls, and ``dynamo_backend2.dynamo_backend``; both run graphs with
lazytpu's compiled-graph runner (the ``lazytpu`` backend's)."""
