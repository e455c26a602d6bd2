"""esper-ray: the cells of ``esper compare`` as Ray tasks (``--runner ray``)."""
