/* plugq: the control socket's server: one engine thread (pq-control)
 * that takes one client at a time and answers its one command.
 *
 * The protocol is lines of text.  The client sends one command line
 * (CONTROL_LINE_MAX bytes at most, newline included) within
 * CONTROL_TIMEOUT_S seconds: words separated by blanks, each word's
 * %, blanks and control bytes written %XX.  The server answers with
 * "DATA text" lines, then "OK" or "ERR message", and closes.  Only root
 * and the server's own user may talk to it (SO_PEERCRED); anything else
 * (a line too long, control bytes, a client that stops sending) gets an
 * ERR and changes nothing.  control_commands.c runs the commands.
 */
#ifndef PLUGQ_CONTROL_SERVER_H
#define PLUGQ_CONTROL_SERVER_H

struct live_config;
struct control_server;

#define CONTROL_LINE_MAX 8192
#define CONTROL_TIMEOUT_S 5

/* Makes the socket at path (control_socket.h) and starts the thread
 * (after nbdkit's fork).  NULL after log_error.
 */
struct control_server *control_server_start (const char *path,
                                             struct live_config *);

/* Stops the thread (after the command it runs, if any), removes the
 * socket, frees.  NULL is a no-op.
 */
void control_server_stop (struct control_server *);

#endif /* PLUGQ_CONTROL_SERVER_H */
