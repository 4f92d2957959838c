-- Every queue's name, for jobs_totals(): a queue that settled nothing yet still gets a line.
SELECT name AS queue FROM jobs.queue ORDER BY name
