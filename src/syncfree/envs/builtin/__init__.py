"""syncfree's own envs: the classic control tasks, the benchmark's toy and g1-track (the tasks they make up are in
`syncfree.tasks`)."""
