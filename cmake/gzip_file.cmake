# cmake -P helper: FM_FILE (in the current directory) → FM_FILE.gz, gzip level 9, mtime 0 (the
# same bytes for every build).
file(ARCHIVE_CREATE OUTPUT "${FM_FILE}.gz" PATHS "${FM_FILE}" FORMAT raw COMPRESSION GZip
     COMPRESSION_LEVEL 9 MTIME 0)
