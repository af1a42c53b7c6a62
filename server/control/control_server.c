/* plugq: the control socket's server thread (control_server.h). */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/engine_thread.h"
#include "common/log.h"
#include "control_commands.h"
#include "control_server.h"
#include "control_socket.h"

struct control_server {
  struct control_socket socket;
  struct live_config *live;
  int stop_fd;                  /* an eventfd: written to stop */
  pthread_t thread;
};

/* ---------------------------------------------------------------- a client */

/* Both directions give up after CONTROL_TIMEOUT_S: a client that stops
 * sending (or reading) cannot hold the thread for longer.
 */
static void
set_timeouts (int fd)
{
  struct timeval tv = { .tv_sec = CONTROL_TIMEOUT_S };

  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

enum line_status { LINE_OK, LINE_GONE, LINE_REFUSED };

/* The first control byte of buf[0..len), or -1.  Tabs are blanks. */
static long
control_byte_at (const char *buf, size_t len)
{
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char) buf[i];

    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return (long) i;
  }
  return -1;
}

/* One command line into buf (its newline removed), or why not: the
 * client went away before a whole line (nothing to answer), or the
 * line is refused (answered in fp).
 */
static enum line_status
read_line (int fd, char *buf, FILE *fp)
{
  size_t len = 0;
  char *nl = NULL;
  long bad;

  while (nl == NULL && len < CONTROL_LINE_MAX) {
    ssize_t r = recv (fd, buf + len, CONTROL_LINE_MAX - len, 0);

    if (r == -1 && errno == EINTR)
      continue;
    if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      control_refuse (fp, "no whole command line within %d s",
                      CONTROL_TIMEOUT_S);
      return LINE_REFUSED;
    }
    if (r <= 0)
      return LINE_GONE;         /* it closed, or died, half way */
    nl = memchr (buf + len, '\n', (size_t) r);
    len += (size_t) r;
  }
  if (nl == NULL) {
    control_refuse (fp, "the command line is longer than %d bytes",
                    CONTROL_LINE_MAX - 1);
    return LINE_REFUSED;
  }
  *nl = '\0';
  if (nl > buf && nl[-1] == '\r')
    *--nl = '\0';
  bad = control_byte_at (buf, (size_t) (nl - buf));
  if (bad >= 0) {
    control_refuse (fp, "byte 0x%02x at %ld is not text: not a plugq "
                    "command", (unsigned char) buf[bad], bad);
    return LINE_REFUSED;
  }
  return LINE_OK;
}

static void
send_all (int fd, const char *text, size_t len)
{
  while (len > 0) {
    ssize_t r = send (fd, text, len, MSG_NOSIGNAL);

    if (r == -1 && errno == EINTR)
      continue;
    if (r <= 0)
      return;                   /* it went: the command stands anyway */
    text += r;
    len -= (size_t) r;
  }
}

/* After the answer: the client may still be sending (a line too long, a
 * refused peer's command).  Closing with its bytes unread would reset
 * the connection, and it would lose the answer; so the server stops
 * writing and reads to the end (bounded by the timeout and a megabyte).
 */
static void
finish_client (int fd)
{
  char sink[4096];
  size_t total = 0;
  ssize_t r;

  shutdown (fd, SHUT_WR);
  while (total < 1024 * 1024
         && ((r = recv (fd, sink, sizeof sink, 0)) > 0
             || (r == -1 && errno == EINTR)))
    total += r > 0 ? (size_t) r : 0;
}

static void
serve_client (struct control_server *cs, int fd)
{
  char *buf = malloc (CONTROL_LINE_MAX + 1), *answer = NULL;
  size_t answer_len = 0;
  FILE *fp = open_memstream (&answer, &answer_len);
  uid_t uid;

  if (buf == NULL || fp == NULL) {
    log_error ("control: out of memory for a client");
    free (buf);
    if (fp)
      fclose (fp);
    free (answer);
    return;
  }
  set_timeouts (fd);
  if (!control_peer_allowed (fd, &uid))
    control_refuse (fp, "permission denied: uid %d is neither root nor "
                    "the server's user (uid %u)", (int) uid,
                    (unsigned) geteuid ());
  else if (read_line (fd, buf, fp) == LINE_OK)
    control_run (cs->live, buf, fp);
  if (fclose (fp) == 0)
    send_all (fd, answer, answer_len);
  finish_client (fd);
  free (answer);
  free (buf);
}

/* -------------------------------------------------------------- the thread */

static void *
server_thread (void *arg)
{
  struct control_server *cs = arg;
  struct pollfd fds[2] = {
    { .fd = cs->socket.fd, .events = POLLIN },
    { .fd = cs->stop_fd, .events = POLLIN },
  };

  for (;;) {
    int fd;

    if (poll (fds, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      log_error ("control: poll: %m");
      break;
    }
    if (fds[1].revents)
      break;
    fd = accept4 (cs->socket.fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd == -1)
      continue;                 /* the client went before its turn */
    serve_client (cs, fd);
    close (fd);
  }
  return NULL;
}

struct control_server *
control_server_start (const char *path, struct live_config *live)
{
  struct control_server *cs = calloc (1, sizeof *cs);

  if (cs == NULL) {
    log_error ("control=%s: %m", path);
    return NULL;
  }
  cs->live = live;
  cs->stop_fd = eventfd (0, EFD_CLOEXEC);
  if (cs->stop_fd == -1) {
    log_error ("control=%s: eventfd: %m", path);
    free (cs);
    return NULL;
  }
  if (control_socket_listen (&cs->socket, path) == -1)
    goto fail;
  if (engine_thread_create (&cs->thread, "pq-control", server_thread,
                            cs) == -1) {
    log_error ("control=%s: cannot start its thread: %m", path);
    control_socket_close (&cs->socket);
    goto fail;
  }
  return cs;

 fail:
  close (cs->stop_fd);
  free (cs);
  return NULL;
}

void
control_server_stop (struct control_server *cs)
{
  uint64_t one = 1;

  if (cs == NULL)
    return;
  if (write (cs->stop_fd, &one, sizeof one) != sizeof one) {
    /* It runs on: what it uses must stay. */
    log_error ("control: cannot stop the control thread: %m");
    return;
  }
  pthread_join (cs->thread, NULL);
  control_socket_close (&cs->socket);
  close (cs->stop_fd);
  free (cs);
}
