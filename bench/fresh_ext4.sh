# Sourced by the benches that put their state on a fresh filesystem (STATE_FS=ext4, batch_e2e).
#
# fresh_ext4 DIR SIZE [MKFS_ARGS...]: makes a sparse SIZE image at DIR.img, an ext4 on it with
# mkfs's defaults (a journal; inode tables zeroed now, not in the background: lazy init would
# write behind the measured runs) plus MKFS_ARGS, and mounts it on DIR through a loop device
# (root only). This machine's root filesystem has no journal, where each file created costs
# ~0.5 ms (ext4 then skips recently freed inodes by reading their dtime), which a usual disk does
# not show. The caller unmounts it and removes DIR.img (its own trap).
fresh_ext4() {
    local dir=$1 size=$2
    shift 2
    mkdir -p "$dir"
    truncate -s "$size" "$dir.img"
    mkfs.ext4 -q -F "$@" -E lazy_itable_init=0,lazy_journal_init=0 "$dir.img"
    mount -o loop "$dir.img" "$dir"
}
