"""What each of the server's processes sets up for itself, whichever it is (supervisor, API worker, engine
process, single process): the log, the malloc arena, OpenMP's spin, the garbage collector, the listening
socket, parent death, the served models' configs and the ready line. Imports neither FastAPI nor the app."""
