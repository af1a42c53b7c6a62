/* plugq: replacing a file that others may read, in a directory that
 * others may write.
 *
 * The new contents go to a fresh file that no other process can have
 * opened or planted (O_TMPFILE, or mkstemp where the file system has no
 * O_TMPFILE), which is given its mode by descriptor, linked in under a
 * random name and renamed over PATH.  So:
 *   - nothing is ever opened by a name someone else chose or could
 *     predict: a symlink there is never followed, a FIFO never opened
 *     (nothing blocks but writing to a regular file), another user's
 *     file never truncated, written or handed over;
 *   - rename() replaces whatever is at PATH itself (a symlink, a FIFO, a
 *     file) without looking through it;
 *   - readers of PATH see the old file or the whole new one;
 *   - the new file belongs to the calling process's user and has exactly
 *     the mode asked for, whatever the umask.
 * The directory should still belong to that user and not be writable by
 * others: in a world-writable directory without the sticky bit another
 * user could rename a file of theirs over PATH at any time.
 */
#ifndef PLUGQ_REPLACE_FILE_H
#define PLUGQ_REPLACE_FILE_H

#include <sys/types.h>
#include <sys/uio.h>

/* Replaces PATH with a file holding the iovcnt buffers of iov, mode
 * `mode`.  0, or -1 with errno set and *step naming what failed ("open
 * the directory", "create", "write", "chmod", "link", "close",
 * "rename"), for the caller's message.  Safe from any thread; two
 * callers replacing the same PATH at once leave one of the two files.
 */
int replace_file (const char *path, mode_t mode,
                  const struct iovec *iov, int iovcnt, const char **step);

/* The same, always through a named temporary file from mkstemp: what
 * replace_file falls back to where O_TMPFILE or linking it in is not
 * available.  For tests, which cannot otherwise reach it.
 */
int replace_file_by_mkstemp (const char *path, mode_t mode,
                             const struct iovec *iov, int iovcnt,
                             const char **step);

#endif /* PLUGQ_REPLACE_FILE_H */
