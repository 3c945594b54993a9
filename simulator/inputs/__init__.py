"""What a simulation is given: scenarios, workloads, systems, accuracy, drafter priors, distributions."""
