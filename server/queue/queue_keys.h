/* plugq: the configuration keys that set a queue_config.
 *
 * ack=, elevator=, unplug-delay= and the rest: where they apply (the
 * defaults or one disk) is the plugin's grammar; their names, values and
 * messages are here, beside the backends' keys (backend_type.h), so that
 * the registry's test can check that no backend key shadows one.
 */
#ifndef PLUGQ_QUEUE_KEYS_H
#define PLUGQ_QUEUE_KEYS_H

#include <stdbool.h>

#include "queue.h"

/* Every queue key, NULL-terminated. */
extern const char *const queue_keys[];

bool queue_key_known (const char *key);

/* Sets key (a queue key) in qc from value: 0, or -1 after log_error. */
int queue_key_set (struct queue_config *qc, const char *key,
                   const char *value);

#endif /* PLUGQ_QUEUE_KEYS_H */
