/* info.h - the CPU backend's library versions (oneDNN, OpenMP) as text. */
#ifndef DL_CPU_INFO_H
#define DL_CPU_INFO_H

/* "oneDNN 3.0.0, OpenMP 4.5" into buf (n bytes); returns buf. */
const char *dl_cpu_info(char *buf, int n);

#endif
