/* bench/energy_probe.c — reads the run record's energy meters (jobs/record: RAPL and NVML) over a short
 * interval and prints what they say; checks the meters on a machine without running a whole backlog.
 *
 *   make build/bench/energy_probe && build/bench/energy_probe [seconds]
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "jobs/record.h"

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    struct record_energy m;
    record_energy_start(&m, 1);
    printf("cpu (rapl): %s, %d zones; gpu (nvml): %s, %d devices\n", m.cpu_available ? "available" : "unavailable",
           m.n_zones, m.gpu_available ? "available" : "unavailable", m.n_gpus);
    usleep((useconds_t)(secs * 1e6));
    double cj, gj;
    record_energy_read(&m, &cj, &gj);
    printf("after %.1f s: cpu %.3f J, gpu %.3f J (-1 = unavailable)\n", secs, cj, gj);
    if (gj > 0) printf("gpu average power %.1f W\n", gj / secs);
    record_energy_stop(&m);
    return 0;
}
