"""`lakehouse gameday`: the deployment tested in front of its operator. In a namespace of
its own on the target (topics, lake, catalog, pipeline), it sends traffic whose answers it
knows, strikes faults at named moments, lets the pipeline recover and reconciles every
layer with what a correct pipeline must hold; one verdict a step, one report."""
