"""3D parts as programs: a small CSG language, solids built by a real geometry kernel, and their views.

`csg` parses the CSG language (an OpenSCAD subset: `cube`, `cylinder`, `sphere`, `translate`,
`rotate`, `union`, `difference`, `intersection`) strictly, with positioned errors. `solid`
builds a parsed program with manifold3d, turns an untrusted triangle mesh into a checked solid,
and measures agreement (exact boolean volume IoU, bounding boxes, surface distance). `scripts`
runs CadQuery scripts in the project's sandbox and brings back their mesh. `views` renders
orthographic depth views of a solid and compares them.
"""
