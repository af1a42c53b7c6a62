/* plugq: the control socket's file (control_socket.h). */

#include <config.h>

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "control_socket.h"

/* The private directory's name beside PATH, and the socket's in it. */
#define TEMP_DIR_NAME "/.plugq-XXXXXX"
#define TEMP_SOCKET_NAME "/s"

static bool
fits_sun_path (const char *path)
{
  struct sockaddr_un sun;

  return strlen (path) < sizeof sun.sun_path;
}

/* PATH's directory, to free. */
static char *
dir_of (const char *path)
{
  char *copy = strdup (path), *dir;

  if (copy == NULL)
    return NULL;
  dir = strdup (dirname (copy));
  free (copy);
  return dir;
}

static int
check_dir (const char *path, const char *dir)
{
  struct stat st;

  if (stat (dir, &st) == -1) {
    log_error ("control=%s: directory %s: %m", path, dir);
    return -1;
  }
  if (!S_ISDIR (st.st_mode)) {
    log_error ("control=%s: %s is not a directory", path, dir);
    return -1;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
    log_error ("control=%s: directory %s is writable by other users and "
               "not sticky: anyone could replace the socket there", path,
               dir);
    return -1;
  }
  return 0;
}

/* Whether a server listens on the socket at path. */
static bool
someone_listens (const char *path)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool listening;

  if (fd == -1)
    return false;
  snprintf (sun.sun_path, sizeof sun.sun_path, "%s", path);
  listening = connect (fd, (struct sockaddr *) &sun, sizeof sun) == 0
    || errno != ECONNREFUSED;
  close (fd);
  return listening;
}

/* Nothing at path, or only a stale socket of ours (removed when
 * remove_stale).  0, or -1 after log_error.
 */
static int
check_target (const char *path, bool remove_stale)
{
  struct stat st;

  if (lstat (path, &st) == -1) {
    if (errno == ENOENT)
      return 0;
    log_error ("control=%s: %m", path);
    return -1;
  }
  if (S_ISLNK (st.st_mode)) {
    log_error ("control=%s: is a symbolic link: refusing to follow it",
               path);
    return -1;
  }
  if (!S_ISSOCK (st.st_mode)) {
    log_error ("control=%s: exists and is not a socket: refusing to "
               "replace it", path);
    return -1;
  }
  if (st.st_uid != geteuid ()) {
    log_error ("control=%s: a socket of uid %u, not this server's (%u): "
               "refusing to replace it", path, (unsigned) st.st_uid,
               (unsigned) geteuid ());
    return -1;
  }
  if (someone_listens (path)) {
    log_error ("control=%s: another server is listening on it", path);
    return -1;
  }
  if (remove_stale && unlink (path) == -1 && errno != ENOENT) {
    log_error ("control=%s: removing the stale socket: %m", path);
    return -1;
  }
  return 0;
}

int
control_socket_check (const char *path)
{
  char *dir;
  int r;

  if (*path != '/' || !fits_sun_path (path)) {
    log_error ("control=%s: not an absolute path short enough for a unix "
               "socket (%zu bytes at most)", path,
               sizeof ((struct sockaddr_un *) 0)->sun_path - 1);
    return -1;
  }
  dir = dir_of (path);
  if (dir == NULL) {
    log_error ("control=%s: %m", path);
    return -1;
  }
  if (strlen (dir) + strlen (TEMP_DIR_NAME TEMP_SOCKET_NAME)
      >= sizeof ((struct sockaddr_un *) 0)->sun_path) {
    log_error ("control=%s: its directory's name is too long: the socket "
               "is made first in a directory inside it (%s" TEMP_DIR_NAME
               TEMP_SOCKET_NAME ")", path, dir);
    free (dir);
    return -1;
  }
  r = check_dir (path, dir) == -1 ? -1 : check_target (path, false);
  free (dir);
  return r;
}

/* Binds fd to a new socket in a private directory beside path, with
 * mode 0600 before anyone can reach it, then links it to path.  The
 * private directory is gone after, whatever happens.
 */
static int
bind_and_link (int fd, const char *path, const char *dir)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  char *tmp = NULL, *sock = NULL;
  int r = -1;

  if (asprintf (&tmp, "%s" TEMP_DIR_NAME, dir) == -1) {
    log_error ("control=%s: %m", path);
    return -1;
  }
  /* The name mkdtemp will give, as long as the template. */
  if (strlen (tmp) + strlen (TEMP_SOCKET_NAME) >= sizeof sun.sun_path) {
    log_error ("control=%s: its directory's name is too long for the "
               "socket made there first (%s" TEMP_SOCKET_NAME ")", path, tmp);
    goto out;
  }
  if (mkdtemp (tmp) == NULL) {
    log_error ("control=%s: a private directory beside it: %m", path);
    goto out;
  }
  if (asprintf (&sock, "%s" TEMP_SOCKET_NAME, tmp) == -1) {
    sock = NULL;
    log_error ("control=%s: %m", path);
    rmdir (tmp);
    goto out;
  }
  memcpy (sun.sun_path, sock, strlen (sock) + 1);
  if (bind (fd, (struct sockaddr *) &sun, sizeof sun) == -1
      || chmod (sock, 0600) == -1 || listen (fd, 16) == -1)
    log_error ("control=%s: %m", path);
  else if (link (sock, path) == -1)
    log_error (errno == EEXIST
               ? "control=%s: appeared while the server made it: refusing "
               "to replace it" : "control=%s: %m", path);
  else
    r = 0;
  unlink (sock);
  rmdir (tmp);
 out:
  free (sock);
  free (tmp);
  return r;
}

int
control_socket_listen (struct control_socket *s, const char *path)
{
  struct stat st;
  char *dir;

  *s = (struct control_socket) { .fd = -1, .path = strdup (path) };
  dir = dir_of (path);
  if (s->path == NULL || dir == NULL) {
    log_error ("control=%s: %m", path);
    goto fail;
  }
  if (control_socket_check (path) == -1 || check_target (path, true) == -1)
    goto fail;
  s->fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->fd == -1) {
    log_error ("control=%s: socket: %m", path);
    goto fail;
  }
  if (bind_and_link (s->fd, path, dir) == -1)
    goto fail;
  if (lstat (path, &st) == -1) {
    log_error ("control=%s: %m", path);
    goto fail;
  }
  free (dir);
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  return 0;

 fail:
  free (dir);
  control_socket_close (s);
  return -1;
}

void
control_socket_close (struct control_socket *s)
{
  struct stat st;

  if (s->fd >= 0) {
    if (s->ino != 0 && lstat (s->path, &st) == 0 && st.st_dev == s->dev
        && st.st_ino == s->ino)
      unlink (s->path);
    close (s->fd);
  }
  s->fd = -1;
  free (s->path);
  s->path = NULL;
}

bool
control_peer_allowed (int fd, uid_t *uid)
{
  struct ucred cred;
  socklen_t len = sizeof cred;

  if (getsockopt (fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == -1) {
    *uid = (uid_t) -1;
    return false;
  }
  *uid = cred.uid;
  return cred.uid == 0 || cred.uid == geteuid ();
}
