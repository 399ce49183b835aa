"""torch_xla.distributed.fsdp.consolidate_sharded_ckpts: the command line
over consolidate_sharded_model_checkpoints (Lightning's XLA FSDP strategy
prints it to users):

    python -m torch_xla.distributed.fsdp.consolidate_sharded_ckpts \\
        --ckpt_prefix PREFIX [--ckpt_suffix "*.pth"] [--save_path PATH]

merges the files matching PREFIX + SUFFIX into one full model state dict,
saved to PATH (default PREFIX + "_consolidated.pth")."""
from argparse import ArgumentParser

from .state_dict_utils import consolidate_sharded_model_checkpoints


def main(argv=None):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt_prefix", type=str, required=True,
                    help="path prefix of the FSDP shard files (ckpt_prefix + ckpt_suffix)")
    ap.add_argument("--ckpt_suffix", type=str, default="*.pth",
                    help="path suffix (a glob) of the FSDP shard files")
    ap.add_argument("--save_path", type=str, default="",
                    help="where the consolidated state dict goes "
                         "(default: ckpt_prefix + '_consolidated.pth')")
    a = ap.parse_args(argv)
    consolidate_sharded_model_checkpoints(a.ckpt_prefix, a.ckpt_suffix, a.save_path)


if __name__ == "__main__":
    main()
