"""brrr: measure, model and grade GPU performance for deep learning, from first principles.

Helper code for the book's notebooks and labs. Each module has one job:

| module     | job                                                         |
|------------|-------------------------------------------------------------|
| device     | which device we run on; per-device problem sizes            |
| timing     | ``bench()``: honest timings on GPU and CPU                  |
| units      | formatting numbers with their units                         |
| stamp      | the device/versions/date line printed beside every number   |
| cache      | where per-user measurements are kept                        |
| ceilings   | this machine's measured roofs: bandwidth, FLOP/s, overhead  |
| roofline   | arithmetic intensity, ridge point, predicted time, regime   |
| counting   | FLOP and byte counts of common ops                          |
| essay      | figures quoted from Horace He's essay, never measured here  |
| plots      | roofline and log-log sweep charts                           |

Import what you use explicitly, e.g. ``from brrr.timing import bench``. Import
``brrr.device`` before ``triton`` so that, on a CPU, the Triton interpreter is on
before any kernel is defined.
"""

__version__ = "0.1.0"
