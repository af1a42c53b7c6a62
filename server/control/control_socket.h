/* plugq: the control socket's file: made safely, removed only if ours.
 *
 * control=PATH is a unix socket of mode 0600 owned by the server's user.
 * Nothing at PATH is followed or replaced, except a socket of the same
 * user that nobody listens on any more (a server that died left it):
 * a symbolic link, another kind of file, another user's socket or a
 * socket a server still listens on are refused with a message saying
 * which.  The socket is made in a private directory beside PATH, given
 * its mode there, and linked to PATH, which fails rather than replace
 * anything that appeared meanwhile; a directory other users may write to
 * without the sticky bit is refused, since anyone could swap PATH in it.
 *
 * Each error is one log_error line starting with "control=PATH: ".
 */
#ifndef PLUGQ_CONTROL_SOCKET_H
#define PLUGQ_CONTROL_SOCKET_H

#include <stdbool.h>
#include <sys/types.h>

struct control_socket {
  int fd;                       /* listening, or -1 */
  char *path;
  dev_t dev;                    /* of the socket this server made */
  ino_t ino;
};

/* Whether PATH could be made, without making it (checked while errors
 * still reach the terminal).  0, or -1 after log_error.
 */
int control_socket_check (const char *path);

/* Makes and listens on the socket: 0, or -1 after log_error. */
int control_socket_listen (struct control_socket *, const char *path);

/* Closes it, and removes PATH if it is still the socket this server
 * made.
 */
void control_socket_close (struct control_socket *);

/* The peer of connection fd may send commands: root or the server's own
 * user.  Its uid in *uid either way; false also when it cannot be told.
 */
bool control_peer_allowed (int fd, uid_t *uid);

#endif /* PLUGQ_CONTROL_SOCKET_H */
