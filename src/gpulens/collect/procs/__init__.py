"""Process attribution: PID → user, container, pod, job and inference engine."""
