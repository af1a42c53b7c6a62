/* plugq: the kinds of operation a request or a backend operation is.
 *
 * One encoding from the nbdkit callback down to the backend: a piece, a
 * batch and a backend_io all carry an enum op_kind.
 */
#ifndef PLUGQ_OP_H
#define PLUGQ_OP_H

enum op_kind { OP_READ, OP_WRITE, OP_ZERO, OP_TRIM, OP_KINDS };

#endif /* PLUGQ_OP_H */
