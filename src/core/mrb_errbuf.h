/*
 * The sizes of the buffers that error messages are written into.  A core
 * function that can fail writes one self-contained line into a buffer its
 * caller passes with its length; these say how long each kind of line may
 * grow, so that every caller of the same function gives the same room.
 * Longer messages are cut, never overrun.
 */

#ifndef MRB_ERRBUF_H
#define MRB_ERRBUF_H

/* A reason without its context: an errno or OpenSSL string, why one file
 * watch or one connection failed. */
#define MRB_ERR_REASON_LEN  256

/* A message with its context, for one log line or configuration error:
 * a path or a name and the reason. */
#define MRB_ERR_MSG_LEN     1024

/* An exception raised by a script: class, message and backtrace. */
#define MRB_ERR_RUN_LEN     2048

#endif /* MRB_ERRBUF_H */
