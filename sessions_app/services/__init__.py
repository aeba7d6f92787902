"""Services of the sessions app: each module holds the write actions of one concern."""
