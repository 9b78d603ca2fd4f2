"""spotctl: the operations CLI of the spot training blueprint."""
