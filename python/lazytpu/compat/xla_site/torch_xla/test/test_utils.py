"""torch_xla.test.test_utils on lazytpu: the helpers pytorch/xla's training
scripts call."""
from lazytpu.utils import (close_summary_writer, get_summary_writer, now,  # noqa: F401
                           print_test_update, print_training_update, write_to_summary)
