"""spotctl: the operations CLI of the spot training blueprint.

`cli` names the commands; each command is a package of its own (`preview`, `render`, `drill`,
`plan`, `review`) whose `__init__` holds the command and whose modules do the work. `outputs` is
where every command writes; `options` the options several commands share; `policy_pack` generates
what the policy pack carries.
"""
