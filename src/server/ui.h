/* ui.h - the chat page's files as the build embeds them (cmake/
 * embed_files.cmake writes ui_files.c from src/server/ui/). Part of the
 * server layer; ui.c serves them.
 * What it is not: a static file server for anything on disk. */
#ifndef PW_SERVER_UI_H
#define PW_SERVER_UI_H

#include <stddef.h>

typedef struct ui_file {
  const char *name;           /* file name, e.g. "app.js" */
  const char *ctype;          /* Content-Type */
  const unsigned char *data;  /* static; NUL after the last byte */
  size_t size;                /* bytes */
} ui_file;

extern const ui_file ui_files[];
extern const int ui_n_files;

#endif
