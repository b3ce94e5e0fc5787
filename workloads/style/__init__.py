"""Gatys et al. neural style transfer with VGG19, as seed 000's parameter study ran it.

The algorithm follows anishathalye/neural-style (the implementation the seed study
swept): content from relu4_2/relu5_2, style from Gram matrices of relu1_1 … relu5_1,
total variation for smoothness, Adam on the image. Modules, one job each:

``config``    the validated parameters and the numbers derived from them
``images``    load, resize, VGG (caffe/BGR) preprocessing, PNG output, colour preservation
``weights``   where the VGG19 weights come from: ImageNet download/cache, seeded random, a file
``vgg``       the feature extractor (stops at the last layer used; max→avg pooling swap)
``memory``    an estimate of the memory a width needs, checked before any work
``losses``    content, style (Gram) and total-variation losses in ``keras.ops``
``optimize``  the compiled Adam step per Keras backend and the monitored loop
``transfer``  one run from parameters to result
``command``   ``workloads style``; ``bench``: ``workloads bench style``
``samples``   the procedural sample images shipped in ``workloads/assets``
"""
