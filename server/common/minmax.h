/* plugq: MIN and MAX that evaluate each argument once. */
#ifndef PLUGQ_MINMAX_H
#define PLUGQ_MINMAX_H

#undef MIN
#undef MAX
#define MIN(a, b)                                                       \
  ({ __typeof__ (a) min_a_ = (a); __typeof__ (b) min_b_ = (b);          \
     min_a_ < min_b_ ? min_a_ : min_b_; })
#define MAX(a, b)                                                       \
  ({ __typeof__ (a) max_a_ = (a); __typeof__ (b) max_b_ = (b);          \
     max_a_ > max_b_ ? max_a_ : max_b_; })

#endif /* PLUGQ_MINMAX_H */
