package sqlrunner.files;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's local file system without checksum files. The runner's applications read and write {@code file:} paths
 * through Hadoop's raw local file system (jobs/localfs.py), which RocksDB's state store cannot commit to: it casts
 * the local file system to {@link LocalFileSystem} as it copies its files into a checkpoint. This one is a
 * {@code LocalFileSystem}, with neither a second file per file written nor checks on read, for the queries that keep
 * their state in RocksDB (the incremental operators of changelog queries).
 */
public class LocalFiles extends LocalFileSystem {
    public LocalFiles() {
        super();
        setWriteChecksum(false);
        setVerifyChecksum(false);
    }
}
