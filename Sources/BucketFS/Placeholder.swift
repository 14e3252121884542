import FUSE
