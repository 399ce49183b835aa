"""torch_xla._dynamo.config. skip_input_data_check: torch_xla skips checking
that a compiled graph's inputs hold data (and fails on pending ones);
lazytpu's compiled graphs run the pending inputs' graph first whatever it is
set to."""
skip_input_data_check = False
